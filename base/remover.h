/* A path removed once a process and every process that inherited one
 * descriptor from it are gone, however they ended (a SIGKILL too): the
 * rank-private folder (hooks/overlay_view_folder.c), multiprocessing's
 * folder of a rank and its children and torch's import-time folder
 * (hvd_remove_at_end, the PyTorch glue's tempdir.py); a file a process
 * was rewriting, put back (hvd_restore_at_end, the glue's checkpoints.py).
 * Uses nothing above base/. */
#ifndef HVD_REMOVER_H
#define HVD_REMOVER_H

/* Starts a watcher process (sh, in a session of its own, empty environment:
 * not a rank, out of the rank's signals and of the reaper's family) that
 * reads a pipe until its write end is closed everywhere, then removes
 * `path` (rm -rf).  Returns that write end (close-on-exec: kept by forked
 * children, not by programs they execute; closing it lets the watcher remove
 * the path now), or -1 where no watcher could start. */
int hvd_remover_spawn(const char *path);
/* The same for paths given later: each line written to the returned end
 * (a path and a newline, in one write) is removed when it is closed
 * everywhere. */
int hvd_remover_spawn_list(void);
/* A watcher that, when the write end is closed everywhere, puts back the
 * files a process was rewriting: each record is two lines, a backup B and
 * a path P (one write), and for each, B there is moved back to P; else,
 * where B.new is there (P was being written anew), P is removed; then B's
 * folder is removed if empty.  A process that finishes its rewrite
 * removes B (or B.new) itself, so nothing is done for it. */
int hvd_remover_spawn_restore(void);

#endif
