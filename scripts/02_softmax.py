"""Code 02 (lecture §4): naive, safe and online softmax, the merge ⊕, online attention."""
from attnlab.demos import run_demo

if __name__ == "__main__":
    run_demo(2)
