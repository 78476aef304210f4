/* Safe output files.  See outfile.h. */
#include "outfile.h"
#include "libc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int hvd_open_output(const char *path, int keep, char *err, size_t errlen) {
  /* O_NONBLOCK: a FIFO planted at the path must not block the open */
  int fd = hvd_libc()->open(path, (keep ? O_RDWR : O_WRONLY) | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) {
    if (errno == ELOOP)
      snprintf(err, errlen, "cannot open '%s': it is a symbolic link (refused: hvdshim never writes through one)", path);
    else
      snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  const char *why = NULL;
  if (fstat(fd, &st) != 0) why = strerror(errno);
  else if (!S_ISREG(st.st_mode)) why = "not a regular file";
  else if (st.st_nlink != 1) why = "it has other hard links (refused: it may be someone else's file)";
  else if (!keep && ftruncate(fd, 0) != 0) why = strerror(errno);
  else if (fcntl(fd, F_SETFL, 0) != 0) why = strerror(errno);
  if (why) {
    snprintf(err, errlen, "cannot open '%s': %s", path, why);
    close(fd);
    return -1;
  }
  return fd;
}
