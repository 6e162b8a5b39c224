"""test/checks.py: the check counter the Python test scripts of test/ share
(each is run as a script, so this directory is on its import path).

    from checks import check, summary
    check(cond, "what was expected", out=(rc, stdout, stderr))  # out: optional
    sys.exit(summary("test_name"))
"""
checks = 0
failures = 0


def check(cond, what, out=None):
    """Count a check; on failure print what was expected (and a command's
    status and output, if given)."""
    global checks, failures
    checks += 1
    if not cond:
        failures += 1
        print("FAIL: %s" % what)
        if out is not None:
            rc, so, se = out
            print("  rc=%d\n  stdout: %r\n  stderr: %r" % (rc, so[:800], se[:800]))
    return bool(cond)


def summary(name):
    """Print the counts; the exit status: 1 if any check failed."""
    print("%s: %d checks, %d failed" % (name, checks, failures))
    return 1 if failures else 0
