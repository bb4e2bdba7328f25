#include "uart_cmsdk.h"

#if !defined(ET_UART_BASE) || !defined(ET_UART_BAUDDIV)
#error "ET_UART_BASE and ET_UART_BAUDDIV must be defined by the build"
#endif

#define UART_REG(offset) (*(volatile uint32_t *)((uintptr_t)(ET_UART_BASE) + (offset)))
#define UART_DATA UART_REG(0x00)
#define UART_STATE UART_REG(0x04)
#define UART_CTRL UART_REG(0x08)
#define UART_BAUDDIV UART_REG(0x10)

#define STATE_TX_FULL 0x1u
#define STATE_RX_FULL 0x2u
#define STATE_RX_OVERRUN 0x8u
#define CTRL_TX_ENABLE 0x1u
#define CTRL_RX_ENABLE 0x2u

void et_uart_init(void)
{
    UART_BAUDDIV = (ET_UART_BAUDDIV); /* the CMSDK UART needs BAUDDIV >= 16 */
    UART_CTRL = CTRL_TX_ENABLE | CTRL_RX_ENABLE;
}

void et_uart_putc(uint8_t c)
{
    while (UART_STATE & STATE_TX_FULL) {
    }
    UART_DATA = c;
}

uint8_t et_uart_getc(void)
{
    uint32_t state;
    while (!((state = UART_STATE) & STATE_RX_FULL)) {
    }
    /* A lost byte breaks the frame's CRC, which the protocol handles; clear the sticky flag. */
    if (state & STATE_RX_OVERRUN) UART_STATE = STATE_RX_OVERRUN;
    return (uint8_t)UART_DATA;
}
