"""Many virtual peers in one process over an in-memory network on trio's virtual clock."""
