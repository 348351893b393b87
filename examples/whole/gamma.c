#include "registry.h"

static int gamma(int x) { return 100 - x; }

__attribute__((constructor)) static void register_gamma(void) { register_plugin("gamma", gamma); }
