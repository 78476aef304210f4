/* CPython bootstrap (hooks/python.c). */
#ifndef HVD_HOOKS_PYTHON_H
#define HVD_HOOKS_PYTHON_H

/* Called by the constructor of an armed rank; 1 when this process is a
 * Python interpreter (the training program), else 0. */
int hvd_python_arm(void);

/* The interpreter option of this process, where it is a Python
 * interpreter, that keeps it from loading the bootstrap ('E', 'I' or 'S':
 * PYTHONPATH or the site module ignored), or 0: hvd_python_bootstrap_flag
 * over /proc/self/cmdline. */
char hvd_python_ignores_bootstrap(void);

/* The first of -E, -I and -S among a Python command line's interpreter
 * options (alone or combined, as -IS or -uE), which end at the script, "-",
 * "--", -c or -m (-W and -X take an argument, in the same word or the
 * next), or 0.  ARGS: the words, argv[0] first, each ended by a NUL, N
 * bytes in all (the form of /proc/PID/cmdline). */
char hvd_python_bootstrap_flag(const char *args, size_t n);
/* Directory of sitecustomize.py and the adapter, or NULL. */
const char *hvd_python_dir(void);

#endif
