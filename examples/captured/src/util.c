unsigned mix(unsigned h, unsigned v) { return (h ^ v) * 16777619u; }
