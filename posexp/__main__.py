"""`python -m posexp ...` (what torchrun launches) behaves like the `posexp` command."""

from posexp.cli import main

if __name__ == "__main__":
    main()
