"""Planning a distributed link: the inputs as LLD's index step names them, and the
planner that turns the index step's outputs into plans (`dist-lto plan`)."""
