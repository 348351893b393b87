"""What `dist-lto inspect` shows of a planned link: the link as a graph (`model`), the
text summary (`text`), drawings (`drawing`: Graphviz input and SVG) and the HTML report
(`html`)."""
