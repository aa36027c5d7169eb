"""Code 04 (lecture §7): the backward pass with recomputation, and training with flash attention."""
from attnlab.demos import run_demo

if __name__ == "__main__":
    run_demo(4)
