package dev.retryd.client;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The Java enums carry retryd's words: each is read from the server's one vocabulary (src/core/model.rs,
 * {@code crate::words!}) and compared in order, so a word added or renamed there fails here. Run by Conformance.
 */
final class VocabularyChecks {
  private VocabularyChecks() {}

  static List<String> words(String source, String enumName) {
    Matcher m = Pattern.compile("crate::words!\\(" + enumName + " \\{(.*?)\\}\\);", Pattern.DOTALL).matcher(source);
    if (!m.find()) return List.of();
    List<String> out = new ArrayList<>();
    Matcher w = Pattern.compile("=>\\s*\"([^\"]+)\"").matcher(m.group(1));
    while (w.find()) out.add(w.group(1));
    return out;
  }

  static List<String> run(Path root) throws Exception {
    List<String> bad = new ArrayList<>();
    String model = Files.readString(root.resolve("src/core/model.rs"));
    List<String> verdicts = Arrays.stream(Verdict.values()).map(Verdict::toString).toList();
    if (!verdicts.equals(words(model, "Verdict"))) bad.add("Verdict words " + verdicts + " != " + words(model, "Verdict"));
    List<String> strategies = Arrays.stream(Strategy.values()).map(Strategy::toString).toList();
    if (!strategies.equals(words(model, "Strategy"))) bad.add("Strategy words " + strategies + " != " + words(model, "Strategy"));
    for (Verdict v : Verdict.values()) {
      if (Verdict.of(v.word()) != v) bad.add("Verdict.of(" + v.word() + ")");
      if (Verdict.of(dev.retryd.v1.Verdict.valueOf("VERDICT_" + v.name())) != v) bad.add("Verdict from proto " + v.name());
    }
    for (Strategy s : Strategy.values()) {
      if (Strategy.of(s.word()) != s) bad.add("Strategy.of(" + s.word() + ")");
      if (Strategy.of(dev.retryd.v1.Strategy.valueOf("STRATEGY_" + s.name())) != s) bad.add("Strategy from proto " + s.name());
    }
    try {
      Verdict.of("RETRY_WITH_LIMIT");
      bad.add("Verdict.of accepted the constant's spelling");
    } catch (IllegalArgumentException e) {
      if (!e.getMessage().contains("retry_with_limit")) bad.add("Verdict.of's error names no words: " + e.getMessage());
    }
    List<String> kinds = Arrays.stream(RetryRefusedException.Kind.values()).map(Object::toString).toList();
    // The conformance suite's error words (clients/conformance/README.md).
    if (!kinds.equals(List.of("verdict", "held", "deadline_exceeded", "fallback", "rejected"))) bad.add("Kind words " + kinds);
    return bad;
  }
}
