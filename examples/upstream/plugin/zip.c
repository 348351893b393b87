/* Referenced by nothing: only --whole-archive (link_whole) brings it in, and its
   constructor registers it. Built as a native object into a prebuilt archive. */
void register_plugin(const char *name);

__attribute__((constructor)) static void register_zip(void) { register_plugin("zip"); }
