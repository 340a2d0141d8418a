package io.cluecdc.connect;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigDecimal;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

class JsonTest {

    private static final List<String> TRICKY = List.of(
        "",
        "plain ascii",
        "a \"quoted\" word",
        "back\\slash and \\\\ double and \\u0041 literal",
        "slash / stays",
        "tab\t newline\n return\r backspace\b formfeed\f",
        "NUL\u0000 SOH\u0001 US\u001f DEL\u007f",
        "latin é ü ß, CJK 中文, Greek λ",
        "emoji \uD83D\uDE00 outside the BMP",
        "line separators \u2028 \u2029",
        "lone surrogates \uD800 and \uDC00",
        "all of it: \"\\\u0000\n\u00e9\uD83D\uDE00\u2028");

    @Test
    void quotedStringsRoundTripThroughTheParser() {
        for (String s : TRICKY) {
            String quoted = Json.quote(s);
            assertEquals(s, Json.parse(quoted), () -> "round trip of " + quoted);
        }
    }

    @Test
    void quotedStringsArePrintableAscii() {
        for (String s : TRICKY) {
            String quoted = Json.quote(s);
            for (char c : quoted.toCharArray()) {
                assertTrue(c >= 0x20 && c < 0x7f, () -> "non-printable or non-ASCII char in " + quoted);
            }
        }
    }

    @Test
    void quoteUsesShortEscapesAndLowercaseUnicodeEscapes() {
        assertEquals("\"a\\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u007f\\u00e9\\ud83d\\ude00/\"",
            Json.quote("a\"b\\c\n\t\r\b\f\u0001\u007f\u00e9\uD83D\uDE00/"));
    }

    @Test
    void parserDecodesEscapesWrittenByOtherSerializers() {
        assertEquals("\u00e9/\uD83D\uDE00\"\\", Json.parse("\"\\u00E9\\/\\uD83D\\ude00\\\"\\\\\""));
        // Raw (unescaped) UTF-8 text is also fine.
        assertEquals("caf\u00e9 \uD83D\uDE00", Json.parse("\"caf\u00e9 \uD83D\uDE00\""));
    }

    @Test
    void parserReadsNestedStructuresSoUnknownKeysCanBeSkipped() {
        Object doc = Json.parse(" {\"meta\":{\"a\":[1,-2.5e-3,{\"b\":[]},true,false,null],\"c\":{}},"
            + "\"values\":{\"password\":\"p\",\"n\":null},\"after\":0}\n");
        Map<?, ?> root = (Map<?, ?>) doc;
        Map<?, ?> values = (Map<?, ?>) root.get("values");
        assertEquals("p", values.get("password"));
        assertTrue(values.containsKey("n"));
        assertNull(values.get("n"));
        List<?> a = (List<?>) ((Map<?, ?>) root.get("meta")).get("a");
        assertEquals(Arrays.asList(new BigDecimal("1"), new BigDecimal("-2.5e-3"), Map.of("b", List.of()),
            true, false, null), a);
        assertEquals(new BigDecimal("0"), root.get("after"));
    }

    @Test
    void parserRejectsMalformedJson() {
        List<String> bad = List.of(
            "", "   ", "{", "{\"a\":1,}", "[1 2]", "[1,]", "{\"a\" 1}", "{a:1}", "\"abc", "\"\\x\"",
            "\"\\u12G4\"", "\"\\u12\"", "\"raw\nnewline\"", "01", "1.", "-", "1e", "+1", "tru", "nul",
            "{} x", "'single'", "[\"a\"]]");
        for (String s : bad) {
            assertThrows(Json.JsonException.class, () -> Json.parse(s), () -> "should reject: " + s);
        }
    }

    @Test
    void parserLimitsNestingDepth() {
        String ok = "[".repeat(Json.MAX_DEPTH) + "]".repeat(Json.MAX_DEPTH);
        Json.parse(ok);
        String tooDeep = "[".repeat(Json.MAX_DEPTH + 1) + "]".repeat(Json.MAX_DEPTH + 1);
        assertThrows(Json.JsonException.class, () -> Json.parse(tooDeep));
    }

    @Test
    void parseErrorsGiveTheOffsetButNeverTheInput() {
        Json.JsonException e = assertThrows(Json.JsonException.class,
            () -> Json.parse("{\"values\":{\"password\":\"hunter2\" \"user\":\"x\"}}"));
        assertTrue(e.getMessage().contains("offset 32"), e.getMessage());
        assertFalse(e.getMessage().contains("hunter2"), e.getMessage());
    }
}
