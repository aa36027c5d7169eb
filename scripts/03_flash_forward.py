"""Code 03: FlashAttention forward on the GPU simulator (lecture §5.3, §5.5, §6.1–6.3).

A thin wrapper: ``attnlab.demos.run_demo(3)`` prints the tables and writes the plot to attnlab-out/.
"""

from attnlab.demos import run_demo

if __name__ == "__main__":
    run_demo(3)
