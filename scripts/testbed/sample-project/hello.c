#include <stdio.h>

int main(void)
{
    printf("hello from the sample project\n");
    return 0;
}
