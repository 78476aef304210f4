"""horovod.runner as hvdshim serves it: only the small helpers that scripts
and Horovod's own tests import (launch with hvdrun or mpirun, not
horovodrun)."""
