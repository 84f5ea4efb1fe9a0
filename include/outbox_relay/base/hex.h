/*
 * hex.h — the one hex digit reader of the relayer: LSNs ("16/B374D848"),
 * bytea's hex output ("\x00ff") and JSON's \uXXXX escapes all read their
 * digits through it. Inline: it sits in the decoders' inner loops.
 */
#ifndef OUTBOX_RELAY_HEX_H
#define OUTBOX_RELAY_HEX_H

/* The value of the hex digit c (either case), or -1. */
static inline int hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20; /* ASCII letters to lower case; nothing else becomes a-f */
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

#endif
