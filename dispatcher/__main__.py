from dispatcher.cli.main import main

main()
