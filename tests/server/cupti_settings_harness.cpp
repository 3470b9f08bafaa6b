// Test harness for perflib's CUPTI library without a GPU (tests/server/test_cupti_kinds.py): it includes the
// library's source and prints which record kinds `read_settings` enables, from PERFLIB_CUPTI_KINDS or the
// library's defaults, one `name 0|1` per line.
#include PERFLIB_CUPTI_SOURCE

int main() {
    Settings s = read_settings();
    printf("kernel %d\nmemcpy %d\nmemset %d\nruntime %d\ndriver %d\noverhead %d\n", s.kernel, s.memcpy, s.memset,
           s.runtime, s.driver, s.overhead);
    return 0;
}
