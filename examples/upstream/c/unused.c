/* No program calls this: the archive member is never loaded. */
#include "text.h"

int never_called(int x) { return x * 7 + 1; }
