/* An object of the same library that no program loads. */
#include "text.h"

unsigned quiet_level(void) { return 0; }
