#!/usr/bin/env python3
"""The decode verdicts of perf/decode_tables.py (met, beyond by a bound, missed) on
made-up rows: which bounds count, and that the bare kernels are named apart."""
import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "perf"))
import decode_tables as dt  # noqa: E402


def row(us):
    return {"us_per_call": us}


class Classify(unittest.TestCase):
    def test_met_at_or_under_the_mark(self):
        self.assertEqual(dt.classify(1.15, {"math floor": 1.3}, 1.15), ("met", "met"))

    def test_a_floor_past_the_mark_and_no_slower_than_the_op(self):
        self.assertEqual(dt.classify(1.30, {"math floor": 1.20, "chain floor": 1.25}, 1.15),
                         ("beyond", "beyond: chain floor 1.25"))

    def test_a_bound_slower_than_the_op_does_not_count(self):
        verdict, text = dt.classify(1.20, {"chain floor": 1.26, "math floor": 1.06}, 1.15)
        self.assertEqual(verdict, "missed")
        self.assertIn("chain floor 1.26", text)

    def test_a_floor_is_named_before_a_larger_bare_bound(self):
        self.assertEqual(dt.classify(1.30, {"math floor": 1.18, dt.BARE: 1.28}, 1.15),
                         ("beyond", "beyond: math floor 1.18"))

    def test_the_bare_kernel_alone_is_named_apart(self):
        self.assertEqual(dt.classify(1.30, {"math floor": 1.10, dt.BARE: 1.28}, 1.15),
                         ("beyond", "beyond: only bare kernel 1.28"))


class StatusTable(unittest.TestCase):
    def rows(self, fused_hot):
        s, n = "shape-a", 64
        return {f"cuda-floor/{s}/nnz:{n}": row(2.0), f"cuda-floor-hot/{s}/nnz:{n}": row(1.0),
                f"cuda/{s}/nnz:{n}": row(2.2), f"cuda-hot/{s}/nnz:{n}": row(fused_hot),
                f"cuda-mathfloor-b128-hot/{s}/nnz:{n}": row(1.05)}

    def status(self, rows, bare=None):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            dt.status_table(rows, bare)
        return out.getvalue()

    def test_counts_without_and_with_bare_rows(self):
        rows = self.rows(1.25)  # hot 1.25x the floor, rotated 1.10x: met
        text = self.status(rows)
        self.assertIn("met 1, beyond the device 0, missed 1", text)
        bare = {"cuda-hot/shape-a/nnz:64": row(1.2)}
        text = self.status(rows, bare)
        self.assertIn("met 1, beyond the device 1 (1 of them by the bare kernel alone), missed 0",
                      text)
        self.assertIn("beyond: only bare kernel 1.20", text)


if __name__ == "__main__":
    unittest.main()
