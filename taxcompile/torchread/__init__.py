"""Read attention out of a PyTorch model: capture its graph (capture), find and place every
attention in Table III (recognise, patterns), and write the answer (report). Imported only
by `classify --torch` and by `taxcompile.classify` given an ``nn.Module``: it imports torch."""
