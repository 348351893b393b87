/* Never referenced: the index step does not load it, and no backend runs for it. */
unsigned unmix(unsigned h, unsigned v) { return h * 2654435761u - v; }
