/* The edgetune serial protocol, firmware side (docs/serial-protocol.md is the specification;
   edgetune.targets.serialproto is the host's twin of these numbers).

   Frame: 0xE7 0x5A | version u8 | type u8 | seq u8 | length u16 | payload | crc16 u16,
   little-endian, CRC-16/CCITT-FALSE over version..payload. */
#ifndef EDGETUNE_SERIAL_PROTO_H
#define EDGETUNE_SERIAL_PROTO_H
#include <stddef.h>
#include <stdint.h>

#define ET_SYNC0 0xE7u
#define ET_SYNC1 0x5Au
#define ET_PROTO_VERSION 1u
#define ET_FRAME_HEADER 7u   /* sync pair + version + type + seq + length */
#define ET_FRAME_OVERHEAD 9u /* header + CRC */
#define ET_REPLY_BIT 0x80u

enum et_msg_type {
    ET_MSG_HELLO = 0x01,
    ET_MSG_LOAD = 0x02,
    ET_MSG_RUN = 0x03,
    ET_MSG_READ = 0x04,
    ET_MSG_CYCLES = 0x05,
    ET_MSG_ERROR = 0x7F,
};

enum et_error_code {
    ET_ERR_BAD_CRC = 1,
    ET_ERR_BAD_VERSION = 2,
    ET_ERR_UNKNOWN_TYPE = 3,
    ET_ERR_BAD_LENGTH = 4,
    ET_ERR_OUT_OF_RANGE = 5,
    ET_ERR_BAD_IO = 6,
    ET_ERR_BAD_ARGUMENT = 7,
    ET_ERR_NOT_RUN = 8,
    ET_ERR_KERNEL_FAILED = 9,
    ET_ERR_FAULT = 10,
};

#define ET_COUNTER_FLAG_DWT 0x01u     /* DWT CYCCNT implemented and enabled */
#define ET_COUNTER_FLAG_SYSTICK 0x02u /* SysTick counted the region without wrapping */

#define ET_RUN_STARTED 0u
#define ET_RUN_DONE 1u

static inline uint16_t et_crc16_update(uint16_t crc, uint8_t byte)
{
    crc ^= (uint16_t)byte << 8;
    for (int i = 0; i < 8; i++) crc = (crc & 0x8000u) ? (uint16_t)((crc << 1) ^ 0x1021u) : (uint16_t)(crc << 1);
    return crc;
}

#endif
