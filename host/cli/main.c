/* main.c - the toolhost command line: dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("toolhost %s\n", TOOLHOST_VERSION);
        return 0;
    }
    fprintf(stderr, "usage: toolhost --version\n");
    return 2;
}
