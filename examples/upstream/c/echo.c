/* Compiled without -flto: a native object of the same library, loaded. */
#include "text.h"

unsigned echo_twice(unsigned x) { return x * 2; }
