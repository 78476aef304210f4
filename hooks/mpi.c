/* MPI interposition (through the standard PMPI profiling interface).
 *
 *   MPI_Init, MPI_Init_thread: a program that initializes MPI itself gets
 *     MPI_THREAD_MULTIPLE asked for on its behalf (the engine thread calls
 *     MPI concurrently with it); `provided` reports what MPI gave.  Where
 *     hvdshim has initialized MPI already (early, when torch was imported,
 *     or its engine), the call succeeds with what MPI provides, as a
 *     second MPI_Init would fail.
 *   MPI_Finalize: stops the engine first (it would otherwise call MPI after
 *     finalize); the engine does not finalize an adopted MPI itself.
 *
 * Our own MPI calls never come back here: the engine calls MPI_Init_thread
 * only when MPI is not initialized, and PMPI_Finalize is not interposed. */
#include <mpi.h>

#include "../base/role.h"
#include "../collectives/hvdshim.h"
#include "mpi_hooks.h"

HVD_EXPORT int MPI_Init(int *argc, char ***argv);
HVD_EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
HVD_EXPORT int MPI_Finalize(void);

static void (*before_finalize)(void);
static void (*before_init)(void);

void hvd_mpi_hooks_on_finalize(void (*fn)(void)) { before_finalize = fn; }
void hvd_mpi_hooks_on_init(void (*fn)(void)) { before_init = fn; }

static int want_multiple(void) {
  hvd_role_t r = hvd_shim_role();
  return r == HVD_ROLE_ARMED || r == HVD_ROLE_ACTIVE;
}

/* 1 when hvdshim's own start of MPI has brought it up (*provided set). */
static int started_by_us(int *provided) {
  if (before_init) before_init();
  int up = 0, down = 0;
  PMPI_Initialized(&up);
  PMPI_Finalized(&down);
  if (!up || down) return 0;
  PMPI_Query_thread(provided);
  return 1;
}

int MPI_Init(int *argc, char ***argv) {
  if (!want_multiple()) return PMPI_Init(argc, argv);
  int provided;
  if (started_by_us(&provided)) return MPI_SUCCESS;
  return PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  if (!want_multiple()) return PMPI_Init_thread(argc, argv, required, provided);
  if (started_by_us(provided)) return MPI_SUCCESS;
  if (required < MPI_THREAD_MULTIPLE) required = MPI_THREAD_MULTIPLE;
  return PMPI_Init_thread(argc, argv, required, provided);
}

int MPI_Finalize(void) {
  if (before_finalize) before_finalize(); /* stops the engine */
  int down = 0;
  PMPI_Finalized(&down); /* an engine that owned MPI has finalized it already */
  return down ? MPI_SUCCESS : PMPI_Finalize();
}
