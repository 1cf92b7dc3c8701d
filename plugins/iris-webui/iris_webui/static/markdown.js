/* A small Markdown renderer that builds DOM nodes and never parses HTML.
 *
 * Model and user text is untrusted: every piece of it ends up in a Text node (textContent), never
 * in innerHTML, so `<img onerror=...>` or `<script>` is shown as the characters typed. Links are
 * created only for http(s) URLs (checked with the URL parser, not a regex, so `javascript:`,
 * `data:` and scheme tricks such as `java\tscript:` fall back to plain text).
 *
 * Supported: paragraphs (single newlines kept as line breaks), headings, **bold**, *italic*,
 * ~~strike~~, `code`, fenced code blocks, bullet and numbered lists (one nesting level by
 * indentation), block quotes, horizontal rules, [text](http-url) links and bare http(s) URLs.
 */
(function (global) {
  "use strict";

  var FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
  var HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  var BULLET = /^(\s*)([-*+])\s+(.*)$/;
  var NUMBERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
  var QUOTE = /^\s{0,3}>\s?(.*)$/;
  var RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
  var ESCAPABLE = "\\`*_{}[]()#+-.!~>|";

  function el(tag, className) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    return node;
  }

  /** The URL when it is an absolute http(s) URL, else null. */
  function safeUrl(raw) {
    var url;
    try {
      url = new URL(raw);
    } catch (e) {
      return null;
    }
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  }

  function link(href, label) {
    var a = el("a");
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    inline(label, a);
    return a;
  }

  function isWordChar(ch) {
    return !!ch && /[\p{L}\p{N}]/u.test(ch);
  }

  /** Where the closing `marker` of an emphasis that opened just before `from` is, or -1. */
  function closing(text, marker, from) {
    var at = from;
    while (at < text.length) {
      var next = text.indexOf(marker, at);
      if (next < 0) return -1;
      var before = text[next - 1];
      var after = text[next + marker.length];
      var flanking = next > from && before !== " " && before !== "\t";
      // `_` inside words (snake_case) is not emphasis; `*` may be.
      var wordy = marker[0] === "_" && isWordChar(after);
      // `**` is not a closing single `*`.
      var doubled = marker === "*" && (after === "*" || before === "*");
      if (flanking && !wordy && !doubled) return next;
      at = next + marker.length;
    }
    return -1;
  }

  /** Inline markup of `text`, appended to `parent` as nodes. */
  function inline(text, parent) {
    var buffer = "";
    function flush() {
      if (buffer) parent.appendChild(document.createTextNode(buffer));
      buffer = "";
    }
    var i = 0;
    while (i < text.length) {
      var ch = text[i];
      var rest = text.slice(i);
      var match;
      if (ch === "\\" && i + 1 < text.length && ESCAPABLE.indexOf(text[i + 1]) >= 0) {
        buffer += text[i + 1];
        i += 2;
        continue;
      }
      if (ch === "`") {
        var run = /^`+/.exec(rest)[0];
        var end = text.indexOf(run, i + run.length);
        if (end > i) {
          flush();
          var code = el("code");
          code.textContent = text.slice(i + run.length, end).replace(/^ (.+) $/, "$1");
          parent.appendChild(code);
          i = end + run.length;
          continue;
        }
        buffer += run;
        i += run.length;
        continue;
      }
      if ((ch === "*" || ch === "_" || ch === "~") && text[i + 1] === ch && text[i + 2] !== " ") {
        var pair = ch + ch;
        var stop = text[i + 2] !== undefined && !(ch === "_" && isWordChar(text[i - 1]))
          ? closing(text, pair, i + 2)
          : -1;
        if (stop > i + 2) {
          flush();
          var strong = el(ch === "~" ? "del" : "strong");
          inline(text.slice(i + 2, stop), strong);
          parent.appendChild(strong);
          i = stop + 2;
          continue;
        }
      } else if ((ch === "*" || ch === "_") && text[i + 1] !== " " && text[i + 1] !== undefined &&
                 !(ch === "_" && isWordChar(text[i - 1]))) {
        var close = closing(text, ch, i + 1);
        if (close > i + 1) {
          flush();
          var em = el("em");
          inline(text.slice(i + 1, close), em);
          parent.appendChild(em);
          i = close + 1;
          continue;
        }
      }
      if (ch === "[" && (match = /^\[([^\]\n]*)\]\(\s*<?([^\s()<>]+)>?(?:\s+"[^"\n]*")?\s*\)/.exec(rest))) {
        var href = safeUrl(match[2]);
        if (href && match[1]) {
          flush();
          parent.appendChild(link(href, match[1]));
          i += match[0].length;
          continue;
        }
        // Not a web link: the whole construct stays literal text.
        buffer += match[0];
        i += match[0].length;
        continue;
      }
      if ((ch === "h" || ch === "H") && !isWordChar(text[i - 1]) &&
          (match = /^https?:\/\/[^\s<>"]+/i.exec(rest))) {
        var raw = match[0].replace(/[.,;:!?'")\]]+$/, "");
        var auto = safeUrl(raw);
        if (auto) {
          flush();
          var a = el("a");
          a.href = auto;
          a.target = "_blank";
          a.rel = "noopener noreferrer";
          a.textContent = raw;
          parent.appendChild(a);
          i += raw.length;
          continue;
        }
      }
      buffer += ch;
      i += 1;
    }
    flush();
  }

  /** Lines of a paragraph, joined by <br>. */
  function lines(parts, parent) {
    parts.forEach(function (part, index) {
      if (index > 0) parent.appendChild(el("br"));
      inline(part, parent);
    });
  }

  function listMatch(line) {
    var m = BULLET.exec(line);
    if (m && !RULE.test(line)) return { indent: m[1].length, ordered: false, start: 1, text: m[3] };
    m = NUMBERED.exec(line);
    if (m) return { indent: m[1].length, ordered: true, start: parseInt(m[2], 10), text: m[3] };
    return null;
  }

  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || QUOTE.test(line) || RULE.test(line) ||
      !!listMatch(line);
  }

  /** A list starting at lines[index]; returns the index after it. */
  function list(all, index, parent) {
    var first = listMatch(all[index]);
    var node = el(first.ordered ? "ol" : "ul");
    if (first.ordered && first.start !== 1) node.start = first.start;
    var item = null;
    var itemText = [];
    function closeItem() {
      if (item) lines(itemText, item);
      itemText = [];
    }
    var i = index;
    while (i < all.length) {
      var line = all[i];
      var m = listMatch(line);
      if (m && m.indent > first.indent + 1 && item) {
        // A deeper item: a nested list inside the current item.
        closeItem();
        i = list(all, i, item);
        item = null;
        continue;
      }
      if (m && m.ordered === first.ordered && m.indent <= first.indent + 1) {
        closeItem();
        item = el("li");
        node.appendChild(item);
        itemText = [m.text];
        i += 1;
        continue;
      }
      if (m || !line.trim() || startsBlock(line) || !item) break;
      itemText.push(line.trim()); // a continuation line of the item
      i += 1;
    }
    closeItem();
    parent.appendChild(node);
    return i;
  }

  /** Blocks of `source` appended to `parent`. */
  function blocks(source, parent) {
    var all = source.replace(/\r\n?/g, "\n").split("\n");
    var i = 0;
    while (i < all.length) {
      var line = all[i];
      var m;
      if (!line.trim()) {
        i += 1;
        continue;
      }
      if ((m = FENCE.exec(line))) {
        var fence = m[1];
        var body = [];
        i += 1;
        while (i < all.length && !(all[i].trim().indexOf(fence) === 0 &&
               all[i].trim().replace(/[`~]/g, "") === "")) {
          body.push(all[i]);
          i += 1;
        }
        i += 1; // the closing fence (or the end of an unterminated block, still streaming)
        var pre = el("pre", "md-code");
        var code = el("code");
        if (m[2]) pre.dataset.lang = m[2];
        code.textContent = body.join("\n");
        pre.appendChild(code);
        parent.appendChild(pre);
        continue;
      }
      if ((m = HEADING.exec(line))) {
        // h1/h2 inside a chat bubble would shout: levels start at h3.
        var heading = el("h" + Math.min(6, m[1].length + 2), "md-h" + m[1].length);
        inline(m[2], heading);
        parent.appendChild(heading);
        i += 1;
        continue;
      }
      if (RULE.test(line)) {
        parent.appendChild(el("hr"));
        i += 1;
        continue;
      }
      if (QUOTE.test(line)) {
        var quoted = [];
        while (i < all.length && (m = QUOTE.exec(all[i]))) {
          quoted.push(m[1]);
          i += 1;
        }
        var quote = el("blockquote");
        blocks(quoted.join("\n"), quote);
        parent.appendChild(quote);
        continue;
      }
      if (listMatch(line)) {
        i = list(all, i, parent);
        continue;
      }
      var paragraph = [];
      while (i < all.length && all[i].trim() && (paragraph.length === 0 || !startsBlock(all[i]))) {
        paragraph.push(all[i]);
        i += 1;
      }
      var p = el("p");
      lines(paragraph, p);
      parent.appendChild(p);
    }
  }

  /** The rendering of `source` as a DocumentFragment. */
  function render(source) {
    var fragment = document.createDocumentFragment();
    blocks(String(source == null ? "" : source), fragment);
    return fragment;
  }

  global.IrisMarkdown = { render: render, safeUrl: safeUrl };
})(window);
