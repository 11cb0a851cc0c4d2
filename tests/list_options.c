/* list_options.c: prints dtrain's option table (src/options_table.c), a row
 * a line: "NAME LETTER CHOICE ...", LETTER "-" where there is none, CHOICE
 * the names the option accepts where it has a list of them.
 *
 * For tests/options_doc.sh and tests/cli_errors.sh, which hold doc/dtrain.1
 * and --help to the table: they read the table itself, as built, not its
 * source text. */
#include <stdio.h>

#include "options_table.h"

int main(void)
{
    for (const struct dt_option *o = dt_option_table; o->name; o++) {
        printf("%s %c", o->name, o->letter ? o->letter : '-');
        for (int i = 0; o->names && o->names[i]; i++) printf(" %s", o->names[i]);
        putchar('\n');
    }
    return 0;
}
