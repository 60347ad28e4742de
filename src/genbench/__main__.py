from genbench.cli import main

main()
