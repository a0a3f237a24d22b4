"""A webhook relay: events in over HTTP, each delivered once by worker processes."""
