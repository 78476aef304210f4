/* Rank-private file writes (HVDSHIM_SAVE_RANKS=0, the default).
 *
 * In a rank > 0 that is a training program (a Python interpreter, or a
 * native program with a hook spec), every regular file the process creates
 * or opens for writing lands in a private overlay folder instead of the real
 * path, and the process's later opens, stats, renames, removals and
 * directory listings of those paths see the overlay (a removed real file is
 * remembered as a "whiteout" and hidden from this process only).  Rank 0
 * and every other process are untouched.  The libc entry points are
 * interposed (overlay_path.c: open/openat/creat/fopen/freopen and their
 * 64-bit names, the stat family, access, rename*, unlink*, mkdir*, rmdir,
 * link, symlink, chmod, truncate, utimensat, opendir/readdir/closedir, and
 * bind/connect of Unix sockets named by a path; overlay_fd.c: the fd calls
 * on the files opened there).  /dev, /proc, /sys, /run, anything that is
 * not a regular file, and calls made by MPI, NCCL, CUDA and hvdshim's own
 * code pass through.  The folder is removed at exit, and by a small watcher
 * process if the rank dies without exiting.  Past HVDSHIM_PRIVATE_BYTES,
 * the blocks of its files that rank 0's real files hold are freed
 * (overlay_bytes.h).  The calls below are overlay.c's (overlay_internal.h
 * has the interposer's files in their order).  docs/ARCHITECTURE.md
 * ("Rank-private files") has the reasoning. */
#ifndef HVD_OVERLAY_H
#define HVD_OVERLAY_H

/* Turn the overlay on in this process (constructor of an armed rank > 0,
 * or of every rank of a job restarted to grow, HVDSHIM_ELASTIC_RESUME: rank
 * 0's writes too are private until the script is back where the job
 * stopped, hvd_overlay_resume). */
void hvd_overlay_arm(int rank, int resuming);
/* Remove the overlay folder now (owner process only; idempotent).  Not
 * called on the fatal path: the watcher removes the folder when the rank's
 * process is gone. */
void hvd_overlay_cleanup(void);
/* Turn it off (exported: the adapter calls it when the script distributes
 * itself); files already in the overlay are dropped. */
__attribute__((visibility("default"))) void hvd_overlay_off(void);
/* This rank became rank 0 (HVDSHIM_ELASTIC: the first one died): its writes
 * are real from now on.  Files it has open in the overlay are reopened at
 * their real paths (at the same position, or at the end when appending)
 * under the same descriptors; then the overlay is dropped.  Exported. */
__attribute__((visibility("default"))) void hvd_overlay_promote(void);
/* The same for rank 0 of a restarted job once its script is back where the
 * job stopped: each file it has open is reopened at its real path, at its
 * end (where the job before the restart left it), never truncated; what it
 * wrote before (the script brought back to that point) is dropped. */
__attribute__((visibility("default"))) void hvd_overlay_resume(void);
/* A rank > 0 saving `path` (an absolute path: the adapter's torch.save and
 * shutil.copyfile) into its private folder (on = 1), or done with it (on =
 * 0).  Where this rank becomes rank 0 meanwhile, the old rank 0's write of
 * that path was cut short (and put back, hvd_restore_at_end): the part this
 * rank wrote is not moved there (a promotion leaves its descriptor on the
 * private copy, which is dropped), and the caller saves again, for real.
 * Returns, on = 1: 0 held; 1 this rank took over the files already (save
 * for real, as rank 0); -1 not held (no overlay here, or 16 held).  A path
 * ending in '/' holds the files directly in that folder (a raw writer's
 * temporary beside its file: sitecustomize's safetensors).  On = 0:
 * 1 where the rank took over the files while the path was held, else 0.
 * Exported (the Python adapter). */
__attribute__((visibility("default"))) int hvd_overlay_hold(const char *path, int on);
/* on = 2 ends a hold for a save that returned, 0 for one that did not
 * (its part is never put in place below).  Every file this rank > 0
 * writes whole (opened with O_TRUNC or O_CREAT|O_EXCL, a save among them,
 * or noted by hvd_overlay_written) and has closed, until
 * hvd_overlay_saves_settled, is put at its real path by a takeover (the
 * old rank 0 had not finished that write, or made the same; a backup the
 * adapter kept for it goes), where the copy holds all its bytes; a rename
 * takes it along (a temporary moved over the checkpoint), a removal
 * forgets it.  The newest 64.  hvd_overlay_saves_settled: the job
 * completed a step with every rank since (rank 0 finished those writes
 * before it): they are forgotten.  Exported (the Python adapter). */
__attribute__((visibility("default"))) void hvd_overlay_saves_settled(void);
/* A rank whose stdout is silenced (the adapter's output.py: descriptor 1
 * on /dev/null) keeps the real one aside in saved_fd: the console goes back
 * there (hvd_overlay_console_back) when this rank becomes rank 0.
 * Exported. */
__attribute__((visibility("default"))) void hvd_overlay_console(int saved_fd);
/* Descriptor 1 back on the saved one (which is closed): once; 0, or -1
 * with errno.  Also done when the death of rank 0 makes this rank rank 0
 * (base/role.h) at the next call the overlay sees in the main thread.
 * Exported. */
__attribute__((visibility("default"))) int hvd_overlay_console_back(void);
/* Where a write of `path` really goes, for code that writes with raw system
 * calls the overlay cannot see (safetensors' Rust tempfile-and-rename; the
 * Python bootstrap hands it this path instead): 1 and the overlay path in
 * out (its folders made), 0 when writes to `path` go to `path` itself, -1
 * with errno.  Exported. */
#include <stddef.h>
__attribute__((visibility("default"))) int hvd_overlay_write_path(const char *path, char *out, size_t len);
/* The file at `path` was written where hvd_overlay_write_path said, by
 * code the overlay cannot follow: its bytes are tracked from here (freed
 * once rank 0's file holds them).  Exported. */
__attribute__((visibility("default"))) void hvd_overlay_written(const char *path);
/* The overlay folder, or NULL while none has been created. */
const char *hvd_overlay_root(void);

#endif
