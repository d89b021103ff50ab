"""Any ``nn.Module`` as a network (issue 29): a user's file, a library model by name, any transformers config."""
