#include "registry.h"

static int alpha(int x) { return x * 2; }

__attribute__((constructor)) static void register_alpha(void) { register_plugin("alpha", alpha); }
