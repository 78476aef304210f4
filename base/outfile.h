/* Files the shim writes (the timeline, the metrics) are opened only
 * through here: never through a symlink (O_NOFOLLOW), only a regular file
 * with a single link (a planted hard link or a FIFO/device is refused),
 * created with mode 0644 (less the umask), close-on-exec. */
#ifndef HVD_OUTFILE_H
#define HVD_OUTFILE_H

#include <stddef.h>

/* Opens `path` for writing and empties it (keep: opens it for reading and
 * writing as it is, made when missing: a file the job goes on writing after
 * a restart or a new rank 0).  Returns the fd, or -1 with a message in err
 * naming the path and the reason. */
int hvd_open_output(const char *path, int keep, char *err, size_t errlen);

#endif
