#include <stdio.h>
#include <string.h>

#include <mgs/mgs.h>

int main(void) {
  int rank = 0;
  /* Before mgs_init every call must fail cleanly. */
  if (mgs_rank(&rank) != MGS_ERR_NOT_INITIALIZED) return 1;
  printf("consumer linked mgs %s (cuda %d)\n", mgs_version(), mgs_built_with_cuda());
  return strlen(mgs_version()) > 0 ? 0 : 1;
}
