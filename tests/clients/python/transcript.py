"""What client.py and cluster.py share: one printable form for what redis-py returns (in either
protocol), and a transcript step that prints a result or its error on one line."""


def canonical(value):
    """One printable form for what redis-py returns in either protocol."""
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "backslashreplace"))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(canonical(v) for v in value) + "]"
    if isinstance(value, set):
        return "{" + ", ".join(sorted(canonical(v) for v in value)) + "}"
    if isinstance(value, dict):
        items = sorted((canonical(k), canonical(v)) for k, v in value.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if value is None:
        return "nil"
    return repr(value)


def step(name, run):
    """Runs `run` and prints `name -> result`: its canonical result, or the error it raised."""
    try:
        result = canonical(run())
    except Exception as error:  # noqa: BLE001 - a failing step is part of the transcript
        result = f"error {type(error).__name__}: {error}"
    print(f"{name} -> {result}", flush=True)
