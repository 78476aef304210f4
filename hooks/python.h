/* CPython bootstrap (hooks/python.c). */
#ifndef HVD_HOOKS_PYTHON_H
#define HVD_HOOKS_PYTHON_H

/* Called by the constructor of an armed rank; 1 when this process is a
 * Python interpreter (the training program), else 0. */
int hvd_python_arm(void);

/* The interpreter option of this process that keeps it from loading the
 * bootstrap ('E', 'I' or 'S': PYTHONPATH or the site module ignored), or 0. */
char hvd_python_ignores_bootstrap(void);
/* Directory of sitecustomize.py and the adapter, or NULL. */
const char *hvd_python_dir(void);

#endif
