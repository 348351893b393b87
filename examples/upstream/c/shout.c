/* Linked as an object of a library without an archive. main.c's only reference,
 * shout_level(), is inlined into main by its backend, so this object must stay in
 * the final link for its constructor to run. */
#include "text.h"

__attribute__((constructor)) static void boost(void) { add_volume(5); }

unsigned shout_level(void) { return 3; }
