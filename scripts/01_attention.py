"""Code 01 (lecture §2, §3.1–3.2): the tiny transformer on LikesWorld, its heads, and why attention is slow."""
from attnlab.demos import run_demo

if __name__ == "__main__":
    run_demo(1)
