/* hvdrun's supervision of the launcher it starts: see supervise.c. */
#ifndef HVD_SUPERVISE_H
#define HVD_SUPERVISE_H

/* Runs EXE with ARGV as a child, passes on the signals sent to hvdrun,
 * waits for it and then for the job's processes it left on this host;
 * returns the launcher's exit status (or ends by its signal).  The ranks
 * of this host get a file to write the job's status in where one ends it,
 * or is killed (the launcher may report 0 all the same). */
int hvd_supervise(const char *exe, char **argv);

#endif
