/* The reaper: every process a rank started ends when the rank ends
 * abnormally (HVDSHIM_REAP=1, the default).
 *
 * A rank's loader workers, multiprocessing's forkserver and resource
 * tracker, a Pool, `subprocess` children: when the rank is SIGKILLed (an
 * OOM kill, a segfault, a test, a dead host's peer aborting the job) they
 * are reparented to init, live on, and keep the rank's output pipes open,
 * so a launcher that counts a process as gone only when its pipes close
 * (Open MPI 5 and 6) never ends the job; one that does not (Open MPI 4)
 * ends it and leaves them behind.  The armed rank forks, in its
 * constructor, a small process outside its process group (titled
 * `hvdshim-reaper (of rank pid N)` in ps) that waits for the rank's end
 * (a pidfd; its parent's change where there is none) and then ends the
 * rank's family:
 *   - the rank's process group (the rank leads one: Open MPI makes every
 *     rank a group leader, and the constructor makes the rank one where
 *     the launcher did not, unless it owns the terminal's foreground);
 *   - every process whose environment names the rank (HVDSHIM_FAMILY, set
 *     here and inherited by every program the rank or its children
 *     execute: spawn and forkserver workers, subprocesses that made a
 *     session of their own).
 * SIGTERM first, SIGKILL to what is left 2 s later.  Python's
 * multiprocessing resource tracker, whose work is to unlink the named
 * semaphores (/dev/shm/sem.mp-*) of a family that dies, leaves the rank's
 * group as it starts: a launcher that ends a job SIGKILLs each rank's
 * group at once (Open MPI 4: SIGTERM then SIGKILL with no pause), and the
 * tracker killed with it left them in /dev/shm for good; out of the group
 * it sees the family's pipe close, unlinks them and exits (the reaper's
 * SIGKILL still ends it if it has not 2 s after the rank's end).
 * A rank that exits with status 0 (exit, return from main, os._exit(0))
 * tells its reaper so first (SIGUSR1), and its family is left alone, as
 * after a plain run: what Python leaves running on purpose (a background
 * upload started in a session of its own) outlives it.  A launcher that
 * does not end within 5 s of a rank ending the job (it cannot reach a
 * cut-off host) is SIGKILLed.  After a rank's abnormal end its reaper also
 * removes what only a launcher that outlived the rank would have: the MPI
 * library's shared-memory files the rank mapped and Hydra's topology file
 * (noted once MPI is up), and
 * the launcher's session folder on this host where that launcher has ended
 * (SIGKILLed here, or ended first: Open MPI 4.1's mpirun sent SIGTERM).  The reaper holds
 * no descriptor of the rank's (its output goes to /dev/null) and ends once
 * the family is gone. */
#ifndef HVD_REAPER_H
#define HVD_REAPER_H

#include <stddef.h>
#include <sys/types.h>

/* In an armed rank process's constructor: fork the reaper, or, in the
 * same process after an exec (a wrapper shell's `exec python`), find the
 * one its earlier image forked.  Idempotent. */
void hvd_reaper_arm(void);
/* In a process a rank started: where it is Python's multiprocessing
 * resource tracker, leave the rank's process group (see above); where it
 * is its forkserver, started by the rank's main thread, die with the rank
 * (PR_SET_PDEATHSIG: its loader workers watch it, not the rank, so where
 * the reaper died with the rank they end too). */
void hvd_reaper_spare_cleaner(void);
/* The armed process ends the job (MPI_Abort), or its part of it: the
 * reaper, once the rank has ended, also ends the rank's Open MPI launcher
 * process on this host (mpirun, orted, prted) if it is still there 5 s
 * later, as one that cannot reach a cut-off host would be (minutes, until
 * TCP gives up).  Async-signal-safe. */
void hvd_reaper_note_ending(void);

/* Once MPI is initialized in the armed rank: the reaper notes what the MPI
 * made that a launcher which does not outlive the rank leaves, and removes
 * it if the rank dies: the MPI library's shared-memory files (Open MPI's
 * /dev/shm/vader_segment.* and sm_segment.*), and MPICH's Hydra proxy's
 * topology file (/tmp/hydra_hwloc_xmlfile_*, once the proxy has ended: an
 * aborted job's proxy does not remove it).  Async-signal-safe (a signal to
 * the reaper). */
void hvd_reaper_note_mpi_files(void);
/* hvdrun's status file (HVDSHIM_STATUS_FILE; found by hvd_reaper_arm,
 * where this process runs under the hvdrun that named it): a line
 * "CODE RANK SIGNAL WHEN" appended (SIGNAL: the one that killed the rank,
 * 0 for a status, -1 unknown; WHEN: hvd_mono_ms() at the end), from which
 * hvdrun takes the first end where its launcher reports 0.  A rank calls
 * it as it ends the job; its reaper, when the rank was killed or exited
 * non-zero without a word (not in an elastic job).  Async-signal-safe but
 * for the formatting. */
void hvd_reaper_status(int code, int rank, int sig, long when_ms);
/* The armed process is ending with STATUS (its exit handler and _exit):
 * status 0 tells the reaper to leave the family alone.  Async-signal-safe;
 * nothing in any other process. */
void hvd_reaper_note_exit(int status);

/* In a rank (WATCHED: whether a watchdog is watching its peers now), and
 * in a program a rank executed (WATCHED NULL): under MPICH's Hydra, SIGUSR1
 * is borne where its action is the default.  With -disable-auto-cleanup, a
 * rank's death makes the proxy send SIGUSR1 to the process group of every
 * rank of its host (Hydra's fault notice; MPICH's library does not catch
 * it), which ended them and their loader workers at once, before the
 * watchdog could name the lost rank: now it names it and ends the job 2 s
 * later.  A rank that nothing watches yet (in MPI_Init, where Hydra's
 * barrier waits for the dead rank for ever) still ends by the signal, and
 * its reaper ends its children; its forked children and the programs it
 * executed ignore it.  A handler of the script's own (signal.signal)
 * replaces this one; under other launchers SIGUSR1 keeps its default (Open
 * MPI's mpirun forwards a user's SIGUSR1 to the ranks). */
void hvd_reaper_bear_hydra_notice(int (*watched)(void));

/* In a rank waiting in MPI_Init (the engine's start watch, every 0.5 s):
 * 1, naming it into WHO, where a rank of this job on this host has had no
 * process for two calls in a row (it ended before MPI started: its script
 * failed, or it was killed, before importing torch), which MPI_Init waits
 * for with no end where the launcher keeps the job alive (mpirun
 * --enable-recovery, Hydra's -disable-auto-cleanup, a rank that ended with
 * status 0).  The job's processes are the launcher's (mpirun, orted, prted,
 * hydra_pmi_proxy) descendants, a few generations down, whose environment
 * names a local rank; 0 where no such launcher is found. */
int hvd_reaper_local_rank_gone(char *who, size_t n);

/* This rank's launcher process on this host (mpirun, orted, prted,
 * hydra_pmi_proxy: the nearest such ancestor, a few generations up) and
 * its start time into START: one job's ranks on one host share it.  0
 * where none is found (srun's step daemon, a launcher of another kind). */
pid_t hvd_reaper_host_launcher(unsigned long long *start);

#endif
