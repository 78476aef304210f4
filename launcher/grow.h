/* hvdrun's supervisor for jobs that grow (--host-discovery-script): see grow.c. */
#ifndef HVD_GROW_H
#define HVD_GROW_H

/* Runs hvdrun (self) again, as a child, over the slots the discovery script
 * lists, once and then after every stop to grow (status 75 with the state
 * saved); returns the status to exit with.  args: the options to repeat
 * (--oversubscribe, --min-np M, --verbose), then "--" and the command. */
int hvd_grow_supervise(const char *script, long np, long max_np, long min_np, double timeout_s, long reset_limit,
                       char **args, int nargs);

#endif
