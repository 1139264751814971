"""One module per output format; each is a pure function of a `Report`."""
