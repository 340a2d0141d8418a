package io.cluecdc.connect;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The little JSON this provider needs, so that its jar has no dependencies.
 *
 * <p>{@link #quote} writes a JSON string literal that is pure ASCII: {@code "} and {@code \},
 * control characters, DEL and every non-ASCII UTF-16 unit are escaped ({@code \n}, {@code \t}, ...
 * or {@code \}{@code uXXXX}; a supplementary character becomes its surrogate pair).
 *
 * <p>{@link #parse} is a strict RFC 8259 reader: objects become {@code Map<String, Object>} (insertion
 * order; a repeated key keeps its last value), arrays {@code List<Object>}, strings {@code String},
 * numbers {@code BigDecimal}, {@code true}/{@code false} {@code Boolean} and {@code null} Java
 * {@code null}. Nesting is limited to {@value #MAX_DEPTH} levels. Error messages give the offset and
 * what was expected, never any of the input (a response may carry secret values).
 */
final class Json {
    static final int MAX_DEPTH = 64;
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private Json() {
    }

    /** Thrown for input that is not valid JSON; the message never contains any of the input. */
    static final class JsonException extends IllegalArgumentException {
        private static final long serialVersionUID = 1L;

        JsonException(String message) {
            super(message);
        }
    }

    // ------------------------------------------------------------------ writing

    /** The JSON string literal for {@code s}, quotes included, ASCII only. */
    static String quote(String s) {
        StringBuilder out = new StringBuilder(s.length() + 2);
        appendQuoted(out, s);
        return out.toString();
    }

    static void appendQuoted(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\b': out.append("\\b"); break;
                case '\f': out.append("\\f"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20 || c >= 0x7f) {
                        out.append("\\u")
                            .append(HEX[(c >> 12) & 0xf]).append(HEX[(c >> 8) & 0xf])
                            .append(HEX[(c >> 4) & 0xf]).append(HEX[c & 0xf]);
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }

    // ------------------------------------------------------------------ reading

    /** Parses one JSON text (surrounding whitespace allowed, nothing else after it). */
    static Object parse(String text) {
        Reader r = new Reader(text);
        r.skipWhitespace();
        Object value = r.readValue(0);
        r.skipWhitespace();
        if (r.pos != text.length()) {
            throw r.error("unexpected content after the JSON value");
        }
        return value;
    }

    private static final class Reader {
        private final String s;
        private int pos;

        Reader(String s) {
            this.s = s;
        }

        JsonException error(String what) {
            return new JsonException("invalid JSON at offset " + pos + ": " + what);
        }

        void skipWhitespace() {
            while (pos < s.length()) {
                char c = s.charAt(pos);
                if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                    pos++;
                } else {
                    break;
                }
            }
        }

        Object readValue(int depth) {
            if (pos >= s.length()) {
                throw error("unexpected end of input, expected a value");
            }
            char c = s.charAt(pos);
            switch (c) {
                case '{': return readObject(depth + 1);
                case '[': return readArray(depth + 1);
                case '"': return readString();
                case 't': expectWord("true"); return Boolean.TRUE;
                case 'f': expectWord("false"); return Boolean.FALSE;
                case 'n': expectWord("null"); return null;
                default:
                    if (c == '-' || (c >= '0' && c <= '9')) {
                        return readNumber();
                    }
                    throw error("expected a value");
            }
        }

        private void checkDepth(int depth) {
            if (depth > MAX_DEPTH) {
                throw error("nested deeper than " + MAX_DEPTH + " levels");
            }
        }

        private Map<String, Object> readObject(int depth) {
            checkDepth(depth);
            pos++; // '{'
            Map<String, Object> map = new LinkedHashMap<>();
            skipWhitespace();
            if (peek() == '}') {
                pos++;
                return map;
            }
            while (true) {
                skipWhitespace();
                if (peek() != '"') {
                    throw error("expected a string (object key)");
                }
                String key = readString();
                skipWhitespace();
                if (peek() != ':') {
                    throw error("expected ':'");
                }
                pos++;
                skipWhitespace();
                map.put(key, readValue(depth));
                skipWhitespace();
                char c = peek();
                if (c == ',') {
                    pos++;
                } else if (c == '}') {
                    pos++;
                    return map;
                } else {
                    throw error("expected ',' or '}'");
                }
            }
        }

        private List<Object> readArray(int depth) {
            checkDepth(depth);
            pos++; // '['
            List<Object> list = new ArrayList<>();
            skipWhitespace();
            if (peek() == ']') {
                pos++;
                return list;
            }
            while (true) {
                skipWhitespace();
                list.add(readValue(depth));
                skipWhitespace();
                char c = peek();
                if (c == ',') {
                    pos++;
                } else if (c == ']') {
                    pos++;
                    return list;
                } else {
                    throw error("expected ',' or ']'");
                }
            }
        }

        /** Reads a string literal; pos is at the opening quote. */
        private String readString() {
            pos++; // opening quote
            StringBuilder out = null;
            int runStart = pos;
            while (true) {
                if (pos >= s.length()) {
                    throw error("unterminated string");
                }
                char c = s.charAt(pos);
                if (c == '"') {
                    String result = out == null
                        ? s.substring(runStart, pos)
                        : out.append(s, runStart, pos).toString();
                    pos++;
                    return result;
                }
                if (c < 0x20) {
                    throw error("unescaped control character in string");
                }
                if (c != '\\') {
                    pos++;
                    continue;
                }
                if (out == null) {
                    out = new StringBuilder();
                }
                out.append(s, runStart, pos);
                pos++; // backslash
                if (pos >= s.length()) {
                    throw error("unterminated escape sequence");
                }
                char e = s.charAt(pos);
                switch (e) {
                    case '"': out.append('"'); break;
                    case '\\': out.append('\\'); break;
                    case '/': out.append('/'); break;
                    case 'b': out.append('\b'); break;
                    case 'f': out.append('\f'); break;
                    case 'n': out.append('\n'); break;
                    case 'r': out.append('\r'); break;
                    case 't': out.append('\t'); break;
                    case 'u': out.append(readHex4()); break;
                    default: throw error("invalid escape sequence");
                }
                pos++;
                runStart = pos;
            }
        }

        /** pos is at the 'u' of a \\uXXXX escape; leaves pos at its last hex digit. */
        private char readHex4() {
            if (pos + 4 >= s.length()) {
                throw error("truncated \\u escape");
            }
            int v = 0;
            for (int i = 1; i <= 4; i++) {
                int d = Character.digit(s.charAt(pos + i), 16);
                if (d < 0) {
                    pos += i;
                    throw error("invalid hex digit in \\u escape");
                }
                v = (v << 4) | d;
            }
            pos += 4;
            // UTF-16 code unit: a surrogate pair arrives as two escapes and recombines by itself.
            return (char) v;
        }

        private BigDecimal readNumber() {
            int start = pos;
            if (peek() == '-') {
                pos++;
            }
            if (peek() == '0') {
                pos++;
            } else if (isDigit(peek()) ) {
                skipDigits();
            } else {
                throw error("invalid number");
            }
            if (peek() == '.') {
                pos++;
                if (!isDigit(peek())) {
                    throw error("invalid number: digit expected after '.'");
                }
                skipDigits();
            }
            if (peek() == 'e' || peek() == 'E') {
                pos++;
                if (peek() == '+' || peek() == '-') {
                    pos++;
                }
                if (!isDigit(peek())) {
                    throw error("invalid number: digit expected in exponent");
                }
                skipDigits();
            }
            try {
                return new BigDecimal(s.substring(start, pos));
            } catch (NumberFormatException ex) { // e.g. an exponent beyond int range
                pos = start;
                throw error("number out of range");
            }
        }

        private void skipDigits() {
            while (isDigit(peek())) {
                pos++;
            }
        }

        private static boolean isDigit(char c) {
            return c >= '0' && c <= '9';
        }

        private void expectWord(String word) {
            if (!s.startsWith(word, pos)) {
                throw error("expected a value");
            }
            pos += word.length();
        }

        /** The character at pos, or NUL at the end of input (never valid where it is checked). */
        private char peek() {
            return pos < s.length() ? s.charAt(pos) : '\0';
        }
    }
}
