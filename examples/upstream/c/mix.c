/* Compiled without -flto: a native object inside a library of bitcode. */
#include "text.h"

unsigned mix(unsigned x) { return (x * 2654435761u) >> 7; }
