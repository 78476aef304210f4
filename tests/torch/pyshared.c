/* A Python interpreter linked against the shared libpython (Debian's
 * /usr/bin/python3 has libpython linked in statically): the bootstrap test
 * runs PyTorch scripts with both kinds. */
extern int Py_BytesMain(int argc, char **argv);

int main(int argc, char **argv) { return Py_BytesMain(argc, argv); }
