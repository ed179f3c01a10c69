from dmq.cli.program import main

if __name__ == "__main__":
    main()
