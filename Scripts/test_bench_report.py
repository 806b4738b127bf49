"""Tests of bench_report.cpu_ns: a process's CPU time from /proc never goes back when a thread ends."""
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report  # noqa: E402


class CPUTimeTests(unittest.TestCase):
    def test_an_ended_thread_keeps_its_time(self):
        started, finish = threading.Event(), threading.Event()

        def burn():
            end = time.process_time() + 0.05
            while time.process_time() < end:
                pass
            started.set()
            finish.wait()

        worker = threading.Thread(target=burn)
        worker.start()
        started.wait()
        with_worker = bench_report.cpu_ns(os.getpid())
        finish.set()
        worker.join()
        # The worker's 50 ms are gone from /proc once it ended; a plain sum would now be ~50 ms lower.
        self.assertGreaterEqual(bench_report.cpu_ns(os.getpid()), with_worker)


if __name__ == "__main__":
    unittest.main()
