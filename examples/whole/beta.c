#include "registry.h"

static int beta(int x) { return x * x + 1; }

__attribute__((constructor)) static void register_beta(void) { register_plugin("beta", beta); }
