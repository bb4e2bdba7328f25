/* Minimal Arm semihosting calls used by the edgetune harness (file output and exit).
   Operation numbers and parameter blocks follow Arm's "Semihosting for AArch32 and AArch64"
   specification. */
#ifndef EDGETUNE_SEMIHOST_H
#define EDGETUNE_SEMIHOST_H
#include <stddef.h>
#include <stdint.h>

int et_sh_open_write(const char *path);                 /* returns a handle, or -1 */
int et_sh_write(int handle, const void *data, size_t len); /* returns 0 when all bytes went out */
void et_sh_close(int handle);
void et_sh_write0(const char *text);                     /* debug text to QEMU's stderr */
__attribute__((noreturn)) void et_sh_exit(int code);      /* QEMU exits with this status */

#endif
