"""Helpers the bench drivers share."""
import platform


def cpu_name():
    """The CPU's model name from /proc/cpuinfo (the host field of result files)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
