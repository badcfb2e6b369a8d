/*
 * data/jsonl.h — documents from JSON Lines, the form public corpora are saved in (one JSON object per
 * line, the text in a named field: TinyStories, FineWeb samples, ...). jsonl_field pulls one string
 * field out of one line, decoding JSON's escapes (\uXXXX and surrogate pairs included) into UTF-8;
 * every other value is skipped over without being built. A line that is not such an object yields a
 * message saying what is wrong, for the caller's "FILE:LINE: ..." error. Blank lines are no documents.
 */
#ifndef DATA_JSONL_H
#define DATA_JSONL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char* p;      // read position
    const char* end;
    const char* error;  // NULL, or what is wrong
} JsonCursor;

static inline void jsonl_ws(JsonCursor* c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n')) { c->p++; }
}

static inline int jsonl_hex4(const char* s, uint32_t* v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char ch = s[k];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) { return -1; }
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

static inline size_t jsonl_put_utf8(uint8_t* out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { out[0] = (uint8_t)(0xC0 | (cp >> 6)); out[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12)); out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18)); out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (uint8_t)(0x80 | (cp & 0x3F)); return 4;
}

// a string at c->p (at its opening quote); out NULL: skipped, else decoded into out (room for as many
// bytes as the line has), *n its length
static inline void jsonl_string(JsonCursor* c, uint8_t* out, size_t* n) {
    size_t k = 0;
    if (c->p >= c->end || *c->p != '"') { c->error = "expected a string"; return; }
    c->p++;
    while (c->p < c->end && *c->p != '"') {
        unsigned char ch = (unsigned char)*c->p;
        if (ch < 0x20) { c->error = "control character inside a string"; return; }
        if (ch != '\\') { if (out) { out[k] = ch; } k++; c->p++; continue; }
        if (c->p + 1 >= c->end) { c->error = "unfinished escape"; return; }
        char e = c->p[1];
        c->p += 2;
        uint32_t cp;
        switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = 8; break;
            case 'f': cp = 12; break;
            case 'n': cp = 10; break;
            case 'r': cp = 13; break;
            case 't': cp = 9; break;
            case 'u':
                if (c->end - c->p < 4 || jsonl_hex4(c->p, &cp) != 0) { c->error = "bad \\u escape"; return; }
                c->p += 4;
                if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate must be followed by a low one
                    uint32_t lo;
                    if (c->end - c->p < 6 || c->p[0] != '\\' || c->p[1] != 'u' || jsonl_hex4(c->p + 2, &lo) != 0 ||
                        lo < 0xDC00 || lo >= 0xE000) { c->error = "unpaired surrogate in a \\u escape"; return; }
                    c->p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp < 0xE000) { c->error = "unpaired surrogate in a \\u escape"; return; }
                break;
            default: c->error = "unknown escape"; return;
        }
        uint8_t buf[4];
        size_t m = jsonl_put_utf8(buf, cp);
        if (out) { memcpy(out + k, buf, m); }
        k += m;
    }
    if (c->p >= c->end) { c->error = "unterminated string"; return; }
    c->p++;
    if (n) { *n = k; }
}

static inline void jsonl_skip_value(JsonCursor* c, int depth) {
    jsonl_ws(c);
    if (c->p >= c->end) { c->error = "missing value"; return; }
    if (depth > 64) { c->error = "nested too deeply"; return; }
    char ch = *c->p;
    if (ch == '"') { jsonl_string(c, NULL, NULL); return; }
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->p++;
        jsonl_ws(c);
        if (c->p < c->end && *c->p == close) { c->p++; return; }
        for (;;) {
            if (ch == '{') {
                jsonl_ws(c);
                jsonl_string(c, NULL, NULL);
                if (c->error) { return; }
                jsonl_ws(c);
                if (c->p >= c->end || *c->p != ':') { c->error = "expected ':'"; return; }
                c->p++;
            }
            jsonl_skip_value(c, depth + 1);
            if (c->error) { return; }
            jsonl_ws(c);
            if (c->p < c->end && *c->p == ',') { c->p++; continue; }
            if (c->p < c->end && *c->p == close) { c->p++; return; }
            c->error = ch == '{' ? "expected ',' or '}'" : "expected ',' or ']'";
            return;
        }
    }
    const char* words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t len = strlen(words[k]);
        if ((size_t)(c->end - c->p) >= len && memcmp(c->p, words[k], len) == 0) { c->p += len; return; }
    }
    const char* start = c->p;  // a number: -?digits[.digits][e[+-]digits]
    if (c->p < c->end && *c->p == '-') { c->p++; }
    while (c->p < c->end && ((*c->p >= '0' && *c->p <= '9') || *c->p == '.' || *c->p == 'e' || *c->p == 'E' ||
                             *c->p == '+' || *c->p == '-')) { c->p++; }
    if (c->p == start || (c->p == start + 1 && *start == '-')) { c->error = "not a JSON value"; }
}

// the string value of `field` in the object on [line, end) into out (room for end - line bytes);
// returns its length, or -1 with *why set. A blank line returns -2 (no document).
static inline long jsonl_field(const char* line, const char* end, const char* field, uint8_t* out, const char** why) {
    JsonCursor c = {line, end, NULL};
    jsonl_ws(&c);
    if (c.p == c.end) { return -2; }
    if (*c.p != '{') { *why = "not a JSON object"; return -1; }
    c.p++;
    long found = -1;
    size_t flen = strlen(field);
    jsonl_ws(&c);
    if (c.p < c.end && *c.p == '}') { c.p++; }
    else for (;;) {
        jsonl_ws(&c);
        const char* key = c.p + 1;
        jsonl_string(&c, NULL, NULL);
        if (c.error) { *why = c.error; return -1; }
        int match = (size_t)(c.p - 1 - key) == flen && memcmp(key, field, flen) == 0;  // keys compared as written
        jsonl_ws(&c);
        if (c.p >= c.end || *c.p != ':') { *why = "expected ':'"; return -1; }
        c.p++;
        jsonl_ws(&c);
        if (match) {
            if (c.p >= c.end || *c.p != '"') { *why = "the field is not a string"; return -1; }
            size_t n;
            jsonl_string(&c, out, &n);
            if (c.error) { *why = c.error; return -1; }
            found = (long)n;
        } else {
            jsonl_skip_value(&c, 1);
            if (c.error) { *why = c.error; return -1; }
        }
        jsonl_ws(&c);
        if (c.p < c.end && *c.p == ',') { c.p++; continue; }
        if (c.p < c.end && *c.p == '}') { c.p++; break; }
        *why = "expected ',' or '}'";
        return -1;
    }
    jsonl_ws(&c);
    if (c.p != c.end) { *why = "data after the object"; return -1; }
    if (found < 0) { *why = "no such field"; return -1; }
    return found;
}

#endif // DATA_JSONL_H
