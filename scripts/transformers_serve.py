#!/usr/bin/env python3
"""`transformers serve …` with the continuous-batching engine's own log at INFO level, so the log names
the paged cache it sized (block size, blocks, tokens per batch), the attention path and every eviction.
Arguments are those of `transformers serve`."""

import logging
import sys

from transformers.cli.transformers import main

logging.getLogger("ContinuousBatchingLogger").setLevel(logging.INFO)
sys.argv = ["transformers", "serve", *sys.argv[1:]]
main()
