/* Polled driver for the Arm CMSDK APB UART (the UART of the MPS2/MPS3 FPGA boards and of
   QEMU's models of them). Register map: Arm CoreLink SDK (CMSDK) Technical Reference
   Manual, "APB UART"; offsets and bits checked against QEMU (docs/measurements.md, "UART"). */
#ifndef EDGETUNE_UART_CMSDK_H
#define EDGETUNE_UART_CMSDK_H
#include <stdint.h>

void et_uart_init(void);       /* BAUDDIV from ET_UART_BAUDDIV, TX and RX enabled */
void et_uart_putc(uint8_t c);  /* waits while the TX buffer is full */
uint8_t et_uart_getc(void);    /* waits for a byte */

#endif
