"""Imported by the rank scripts the torch tests start: a rank that `plait run --timeout`
stops (SIGTERM) first prints every thread's Python stack, so a hang, at exit or anywhere,
says where it is instead of only that the test ran out of time."""
import faulthandler
import signal

faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
